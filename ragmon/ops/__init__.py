"""What operators deploy next to ragmon: generated alert rules and the Grafana dashboard."""
