"""Run bookkeeping shared by the loop: the output-directory lock, leases, early stopping, progress, summary."""
