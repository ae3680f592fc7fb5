"""The Dispatcher: accepts JobGraphs, starts a JobMaster per job, keeps jobs' records and results."""
