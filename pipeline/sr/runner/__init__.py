"""The run itself: the file mapping, the per-image worker, the scheduler, records, the console."""
