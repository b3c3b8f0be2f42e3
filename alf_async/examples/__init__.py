"""Small runnable examples of the alf_async API (``python -m alf_async.examples.NAME``)."""
