//! Runs waiting to be written ([`Pending`]): each already turned into the row the store keeps,
//! its text appended to one buffer, so a run leaves nothing of its own behind (no allocation
//! another thread must free) once it is recorded.

use quanta::Instant;

use crate::events::records::NewRun;

/// A range of [`Pending::text`].
pub(super) type Span = (u32, u32);

/// One run's row: its text fields as ranges of the buffer, but for the ones the program names
/// (its door, status and problem), which are not copied.
#[derive(Debug, Clone, Copy)]
struct Row {
    /// When the run ended: the order rows are written in, across every buffer
    /// ([`Pending::take`]).
    ended: Instant,
    id: Span,
    door: &'static str,
    principal: Span,
    skill: Span,
    started_ms: i64,
    duration_us: i64,
    status: &'static str,
    problem: Option<&'static str>,
    parent: Option<Span>,
    args: Span,
    result: Option<Span>,
    /// `None`: the detail of most runs, `{}`.
    detail: Option<Span>,
}

/// A run's row but for its args and result, which are written into the buffer in place
/// ([`Pending::write`]) and given to [`Pending::push`] as spans.
#[derive(Debug, Clone, Copy)]
pub(super) struct Head<'a> {
    pub id: &'a str,
    pub door: &'static str,
    pub principal: &'a str,
    pub skill: &'a str,
    pub started_ms: i64,
    pub duration_us: i64,
    /// When it ended, on the clock runs are timed by.
    pub ended: Instant,
    pub status: &'static str,
    pub problem: Option<&'static str>,
    pub parent: Option<&'a str>,
    /// `None` for `{}`.
    pub detail: Option<&'a str>,
}

/// Rows of runs, their text in one buffer.
#[derive(Debug, Default)]
pub(super) struct Pending {
    text: String,
    rows: Vec<Row>,
}

/// Where a buffer stood before a run was added ([`Pending::undo`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    text: usize,
    rows: usize,
}

/// A buffer that grew past this while a burst waited gives its memory back once written.
const KEEP_CAPACITY: usize = 256 * 1024;

impl Pending {
    /// Appends what `write` writes to the buffer, a field written in place rather than
    /// copied in ([`Pending::push`]): its span, and what `write` returned.
    pub fn write<R>(&mut self, write: impl FnOnce(&mut String) -> R) -> (Span, R) {
        let start = self.text.len() as u32;
        let written = write(&mut self.text);
        ((start, self.text.len() as u32), written)
    }

    /// Adds the run `run` heads, with its args and result already written
    /// ([`Pending::write`]).
    pub fn push(&mut self, run: Head<'_>, args: Span, result: Option<Span>) {
        let row = Row {
            ended: run.ended,
            id: self.keep(run.id),
            door: run.door,
            principal: self.keep(run.principal),
            skill: self.keep(run.skill),
            started_ms: run.started_ms,
            duration_us: run.duration_us,
            status: run.status,
            problem: run.problem,
            parent: run.parent.map(|p| self.keep(p)),
            args,
            result,
            detail: run.detail.map(|d| self.keep(d)),
        };
        self.rows.push(row);
    }

    fn keep(&mut self, text: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.push_str(text);
        (start, self.text.len() as u32)
    }

    fn span(&self, (start, end): Span) -> &str {
        &self.text[start as usize..end as usize]
    }

    /// Where this buffer stands now.
    pub fn mark(&self) -> Mark {
        Mark {
            text: self.text.len(),
            rows: self.rows.len(),
        }
    }

    /// Bytes of text added since `mark`.
    pub fn bytes_since(&self, mark: Mark) -> u64 {
        (self.text.len() - mark.text) as u64
    }

    /// Forgets what was added since `mark`.
    pub fn undo(&mut self, mark: Mark) {
        self.text.truncate(mark.text);
        self.rows.truncate(mark.rows);
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Bytes of text held.
    pub fn bytes(&self) -> u64 {
        self.text.len() as u64
    }

    /// Empties the buffer, keeping its memory unless a burst made it large.
    pub fn clear(&mut self) {
        self.text.clear();
        self.rows.clear();
        if self.text.capacity() > KEEP_CAPACITY {
            self.text.shrink_to(KEEP_CAPACITY / 4);
            self.rows
                .shrink_to(KEEP_CAPACITY / 4 / std::mem::size_of::<Row>());
        }
    }

    /// The rows of `buffers`, in the order their runs ended.
    pub fn take(buffers: &[Pending]) -> Vec<NewRun<'_>> {
        let mut rows: Vec<(Instant, &Pending, &Row)> = buffers
            .iter()
            .flat_map(|b| b.rows.iter().map(move |row| (row.ended, b, row)))
            .collect();
        rows.sort_by_key(|(ended, _, _)| *ended);
        rows.into_iter().map(|(_, b, row)| b.run(row)).collect()
    }

    fn run(&self, row: &Row) -> NewRun<'_> {
        NewRun {
            id: self.span(row.id),
            door: row.door,
            principal: self.span(row.principal),
            skill: self.span(row.skill),
            started_ms: row.started_ms,
            duration_us: row.duration_us,
            status: row.status,
            problem: row.problem,
            parent: row.parent.map(|p| self.span(p)),
            args: self.span(row.args),
            result: row.result.map(|r| self.span(r)),
            detail: row.detail.map_or("{}", |d| self.span(d)),
        }
    }
}
