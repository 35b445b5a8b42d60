//! Schedules: skills fired on cron expressions or intervals, declared in `metadata.schedule` or
//! made with `schedule-create`, kept in the event store and fired by `skillgate serve`.

pub mod health;
pub mod runner;
pub mod spec;
pub mod tools;
