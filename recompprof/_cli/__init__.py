"""The ``recompprof`` command: its subcommands, the built-in demo and the ``run`` launcher."""
