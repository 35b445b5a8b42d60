//! The runs record: every root run from every door (what ran, for whom, from which door, how it
//! ended, what it was given and answered), redacted and capped, written to the store off the
//! request path by a [`Recorder`], pruned by age and count, and read back by the runs API and
//! `skillgate runs`.

mod pending;
mod record;
mod recorder;
mod redact;
mod retry;
mod view;

pub use record::{RunRecord, Status};
pub use recorder::{RecordConfig, Recorder};
pub use redact::{REDACTED, redact};
pub use retry::{Retry, retry_of};
pub use view::{MAX_PAGE, PAGE, RunsQuery, full, page, summary};
