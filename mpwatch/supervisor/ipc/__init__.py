"""Transport only: the supervisor's sockets and their handshake, the workers' channel hub (frames in
and out; the report ledger, supervisor.workers.ledger, folds them), the control socket's server (its
requests run in supervisor.commands)."""
