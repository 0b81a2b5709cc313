"""Fleet simulator: data partitioners now; virtual devices and clock come with the simulator issue."""
