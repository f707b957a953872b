"""Running workers as a service (``pgqueue work``): loading the app, one or N worker
processes, stop signals, exit codes."""
