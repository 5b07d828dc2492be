"""Named exit codes of every cdcctl command."""

OK = 0
CHECK_FAILED = 1  # a check found a problem (validate, test-connection)
USAGE = 2  # bad usage or bad config: nothing was started
RUNTIME = 3  # a runtime failure: broker, Spark, storage, missing Java
