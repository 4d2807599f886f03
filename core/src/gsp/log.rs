//! LIBOS log buffers (placeholder, filled in below).
