"""Files in and out: Parquet read in chunks (with projection and a read-once cache), the atomic Parquet
writer and side files, the row-group joiner, and trainer dumps.
"""
