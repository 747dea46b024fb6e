"""``parcat bench``: the versioned benchmark suite, its history and regression check."""
