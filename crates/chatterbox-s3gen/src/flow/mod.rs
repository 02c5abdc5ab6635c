//! The token-to-mel flow (issue in progress).
