//! The S3 speech tokenizer (issue in progress).
