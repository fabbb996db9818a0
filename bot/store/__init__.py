"""The database and nothing else: the engines and their transactions, the write lock, the
tables and their column types, full-text search, the migrations, and the raw-SQL fast paths
beside the queries they mirror.
"""
