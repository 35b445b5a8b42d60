//! The transport contract, for doors written outside skillgate (behind the `contract` feature):
//! what every door must do, written once against the [`Harness`] trait and run against a door
//! by the [`transport_contract!`](crate::transport_contract) macro. skillgate's own doors (HTTP,
//! WebSocket, Slack, email) and the example door of `examples/jsonl_door` pass the same rules.
//!
//! A harness starts a real server with the door over the contract's [`project`] (with the
//! [`natives`] the rules use; [`Server`] does it with the library's builder) and talks to it
//! with a real client of that door. The rules see only what a client sees: results, streamed
//! parts, refusals, and (through the kernel) what a run leaves behind.
//!
//! ```toml
//! [dev-dependencies]
//! skillgate = { version = "*", features = ["contract"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! - [`harness`]: the [`Harness`] trait and what it answers ([`Outcome`], [`Part`]).
//! - [`project`]: the skills and native tools the rules use.
//! - [`server`]: a server with the doors of its settings and the door under test.
//! - [`rules`]: the rules, one `async fn` each.

pub mod harness;
pub mod project;
pub mod rules;
pub mod server;

pub use harness::{Credential, Harness, Held, Outcome, Part, Refusal, Setup};
pub use project::{Project, natives, project};
pub use server::Server;

/// Every rule of the transport contract as a `#[tokio::test]` against `$harness` (a type that
/// implements [`Harness`]); or the rules named after the colon.
#[macro_export]
macro_rules! transport_contract {
    ($harness:ty) => {
        $crate::transport_contract!($harness:
            invoke_returns_the_result,
            every_run_is_recorded_with_the_doors_name_its_status_and_problem,
            streaming_delivers_parts_in_order_then_one_final_part,
            a_skill_error_is_the_transports_error_form_with_no_internals,
            invalid_args_are_refused_as_the_callers_mistake,
            a_missing_or_wrong_credential_is_refused,
            hidden_and_middleware_skills_are_refused,
            nonlocals_request_and_gateway_are_filled,
            gateway_message_is_emitted_where_spec_03_says,
            shutdown_drains_in_flight_work,
            directive_keys_anywhere_in_args_are_refused_and_nothing_is_spawned,
            hidden_internal_and_missing_refs_look_alike,
            callers_do_not_administer_the_event_system,
        );
    };
    ($harness:ty: $($rule:ident),* $(,)?) => {
        $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $rule() {
            $crate::contract::rules::$rule::<$harness>().await;
        })*
    };
}
