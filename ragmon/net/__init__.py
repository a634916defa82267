"""What every listening port of ragmon shares: connection caps and timeouts, the in-flight byte budget, bearer tokens, rate-limited logging."""
