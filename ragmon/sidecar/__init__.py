"""The sidecar: the stages wired together (``wiring``), what the status page shows
(``snapshot``), ``ragmon run`` as a process (``process``) and inside an application
(``inprocess``)."""
