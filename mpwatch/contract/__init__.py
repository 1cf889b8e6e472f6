"""What every side shares: the status schema, event names, the wire format, value coercers and pure rules."""
