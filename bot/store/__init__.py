"""The database and nothing else: the engines and their transactions, the write lock, the tables,
full-text search, the migrations, and the raw-SQL fast paths beside the queries they mirror.
"""
