"""Policies served over HTTP (``parcat serve``); the client is :mod:`parcat.policies.remote`."""
