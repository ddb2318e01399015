"""What both engines optimise and measure: the loss, the learning rate, the moving averages, the eval metrics and a confusion matrix's per-class metrics."""
