"""Configuration: the settings read once from the environment, ``aegis.yaml`` as data (and the live
file, followed without a restart), and the secrets kept in the data dir.
"""
