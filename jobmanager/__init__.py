"""The JobManager: Dispatcher, ResourceManager with its SlotManager, JobMasters, BlobServer."""
