"""What pd-doctor knows as data (stdlib only): releases and their fixes, connectors, advisories, hotfixes,
scenarios with their advice and exposure, metric names per release.
"""
