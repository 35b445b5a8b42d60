//! The event bus: the store contract on every store (`store`), its command line (`cli`), event
//! routes declared by skills (`routes`), and what the durable stores promise under stress
//! (`durability`).

mod cli;
mod durability;
mod routes;
mod store;
