//! `/ws` over a real socket.
