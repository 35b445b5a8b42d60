//! How the command line ends: 0 ok, 1 the skill failed, 2 usage error (bad flags, an unknown
//! skill, args that do not fit the skill's params). [`exit_code`] decides it from the kind of
//! the error and where it arose.

use crate::error::ErrorKind;

/// Exit code for a usage error.
pub const USAGE: u8 = 2;
/// Exit code for a skill that failed.
pub const FAILED: u8 = 1;

/// Where the error of a command arose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading the command line, before anything runs: finding the skill it names (a name, a
    /// file, the project's main skill) and turning its flags into args. Whatever fails here
    /// is how the command was written.
    CommandLine,
    /// Raised by the skill the command invoked (its params check included).
    Skill,
    /// Raised deeper in the run: a skill or middleware the invoked skill reached.
    Run,
}

/// The exit code of a command that failed with `kind` at `stage`.
pub fn exit_code(kind: ErrorKind, stage: Stage) -> u8 {
    match (stage, kind) {
        (Stage::CommandLine, _) => USAGE,
        // The args the command line gave fail the params of the skill it names.
        (Stage::Skill, ErrorKind::InvalidArgs) => USAGE,
        // A skill the invoked one calls is missing, or gets bad args: the skills are at
        // fault, not the command.
        (
            Stage::Skill | Stage::Run,
            ErrorKind::Failed
            | ErrorKind::NotFound
            | ErrorKind::InvalidArgs
            | ErrorKind::InvalidReturns
            | ErrorKind::Config
            | ErrorKind::Denied
            | ErrorKind::Aborted
            | ErrorKind::Immutable
            | ErrorKind::NoAgentProvider
            | ErrorKind::Internal,
        ) => FAILED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_exit_code_at_every_stage() {
        for kind in ErrorKind::ALL {
            // An unknown skill, a skill file that does not load, flags that do not parse.
            assert_eq!(exit_code(kind, Stage::CommandLine), USAGE, "{kind:?}");
            let own = if kind == ErrorKind::InvalidArgs {
                USAGE
            } else {
                FAILED
            };
            assert_eq!(exit_code(kind, Stage::Skill), own, "{kind:?}");
            assert_eq!(exit_code(kind, Stage::Run), FAILED, "{kind:?}");
        }
    }
}
