"""Fleet history: the event model exported as Hive-partitioned Parquet tables (docs/history.md), built on
the offline analysis' readers and the event model's counting rules; it never re-derives a verdict."""
