"""The supervisor's sockets: the workers' channel hub, its report ledger, the control socket."""
