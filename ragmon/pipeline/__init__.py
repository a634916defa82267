"""From received spans to finished traces: the bounded ingest queue and its worker, and trace assembly."""
