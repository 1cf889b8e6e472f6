"""Words and numbers for people: event texts, one formatter, stack dumps, the one sanitiser."""
