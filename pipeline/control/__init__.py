"""How work stops and waits: stop signals, endpoint outages, parallel work with progress."""
