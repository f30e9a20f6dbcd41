//! The Celeborn protocol adapter: translates the wire protocol onto the storage crate's block API.
