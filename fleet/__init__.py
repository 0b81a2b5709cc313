"""The `fleet` command line and the demo that ties server, devices and data together."""
