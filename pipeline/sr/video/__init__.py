"""Videos: the PyAV reader and writer, one clip through the worker, segments, their files and their join."""
