"""The report model: the figure families a fold of events gives, the fold that builds them and the merge of folded parts."""
