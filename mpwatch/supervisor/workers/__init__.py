"""The ranks: state machine, process groups and kills, exits, reaping, the watchdog, and the report
ledger that folds each worker's batches into its row (ledger, batch_check)."""
