"""What both engines optimise and measure: the loss, the learning rate, the moving averages, the eval metrics."""
