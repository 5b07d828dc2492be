"""cdcctl: the command-line front end over the replication engine."""
