"""The worker side's sender thread's helpers (mpwatch.worker ships batches; these shape them).
Standard library only, imported by the sender thread on its first flush, never at `import mpwatch`."""
