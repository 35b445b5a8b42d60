//! `skillgate events tail|replay|dead` and `skillgate migrate`: look into the event store.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Subcommand;
use serde_json::{Value, json};

use crate::cli::FAILED;
use crate::events::dead as dead_letters;
use crate::events::{Event, EventStore, check_name};

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// Print a topic's recent events, then follow new ones (one JSON envelope per line).
    Tail {
        topic: String,
        /// How many buffered events to print first.
        #[arg(long, default_value_t = 10)]
        last: usize,
        /// Print the buffered events and stop.
        #[arg(long)]
        no_follow: bool,
    },
    /// Print a topic's buffered events in emit order, after `--from <id>` if given.
    Replay {
        topic: String,
        #[arg(long)]
        from: Option<String>,
    },
    /// List a topic's dead letters (events that used up their deliveries).
    Dead {
        topic: String,
        /// Put them back at the end of the queue they came from.
        #[arg(long)]
        requeue: bool,
    },
    /// Emit and consume under load, printing what returned (used by the crash test).
    #[command(hide = true)]
    Soak {
        #[arg(long)]
        topic: String,
        #[arg(long, default_value = "soak")]
        queue: String,
        /// First sequence number to emit.
        #[arg(long, default_value_t = 0)]
        start: u64,
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Visibility timeout of claims, in milliseconds.
        #[arg(long, default_value_t = 500)]
        visibility: u64,
    },
}

pub async fn run(store: Arc<dyn EventStore>, cmd: &EventsCommand) -> ExitCode {
    let outcome = match cmd {
        EventsCommand::Tail {
            topic,
            last,
            no_follow,
        } => tail(&store, topic, *last, !no_follow).await,
        EventsCommand::Replay { topic, from } => replay(&store, topic, from.as_deref()).await,
        EventsCommand::Dead { topic, requeue } => dead(&store, topic, *requeue).await,
        EventsCommand::Soak {
            topic,
            queue,
            start,
            count,
            visibility,
        } => {
            soak(
                store,
                topic,
                queue,
                *start,
                *count,
                Duration::from_millis(*visibility),
            )
            .await
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::from(FAILED)
        }
    }
}

fn line(value: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

async fn tail(
    store: &Arc<dyn EventStore>,
    topic: &str,
    last: usize,
    follow: bool,
) -> Result<(), String> {
    check_name("topic", topic).map_err(|e| e.to_string())?;
    let all = store
        .buffered(topic, None, usize::MAX)
        .await
        .map_err(|e| e.to_string())?;
    let mut last_id = all.last().map(|e| e.id.clone());
    for event in all.iter().skip(all.len().saturating_sub(last)) {
        line(&event.to_json());
    }
    if !follow {
        return Ok(());
    }
    let mut wakeups = store.wakeups();
    loop {
        tokio::select! {
            _ = wakeups.recv() => {}
            () = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        let new = match store.buffered(topic, last_id.as_deref(), 1000).await {
            Ok(new) => new,
            // The last event printed fell out of the buffer: start from what is there.
            Err(_) => store
                .buffered(topic, None, 1000)
                .await
                .map_err(|e| e.to_string())?,
        };
        for event in &new {
            line(&event.to_json());
        }
        if let Some(e) = new.last() {
            last_id = Some(e.id.clone());
        }
    }
}

async fn replay(
    store: &Arc<dyn EventStore>,
    topic: &str,
    from: Option<&str>,
) -> Result<(), String> {
    check_name("topic", topic).map_err(|e| e.to_string())?;
    for event in store
        .buffered(topic, from, usize::MAX)
        .await
        .map_err(|e| e.to_string())?
    {
        line(&event.to_json());
    }
    Ok(())
}

async fn dead(store: &Arc<dyn EventStore>, topic: &str, requeue: bool) -> Result<(), String> {
    check_name("topic", topic).map_err(|e| e.to_string())?;
    let letters = dead_letters::of_topic(store, topic)
        .await
        .map_err(|e| e.to_string())?;
    for letter in &letters {
        line(&json!({
            "id": letter.id,
            "queue": letter.queue,
            "attempts": letter.attempts,
            "event": letter.event,
        }));
        if requeue {
            dead_letters::requeue(store, letter)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    if requeue {
        eprintln!("requeued {} event(s)", letters.len());
    }
    Ok(())
}

/// Emits `count` numbered events while consuming the queue. Prints `E <n>` once an emit
/// returned, `D <n> <attempts>` for each delivery and `A <n>` just before acking it.
async fn soak(
    store: Arc<dyn EventStore>,
    topic: &str,
    queue: &str,
    start: u64,
    count: u64,
    visibility: Duration,
) -> Result<(), String> {
    store
        .create_queue(topic, queue, false)
        .await
        .map_err(|e| e.to_string())?;
    let emitter = {
        let store = store.clone();
        let topic = topic.to_string();
        tokio::spawn(async move {
            for n in start..start + count {
                let mut event = Event::new(&topic, "soak");
                event.data = Some(json!({ "n": n }));
                store.emit(&event).await.map_err(|e| e.to_string())?;
                println!("E {n}");
            }
            Ok::<(), String>(())
        })
    };
    let mut idle_rounds = 0;
    loop {
        let batch = store
            .claim(topic, queue, 32, visibility)
            .await
            .map_err(|e| e.to_string())?;
        if batch.is_empty() {
            if emitter.is_finished() {
                idle_rounds += 1;
                if idle_rounds > 20 {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        idle_rounds = 0;
        for delivery in batch {
            let n = delivery
                .event
                .data
                .as_ref()
                .and_then(|d| d["n"].as_u64())
                .unwrap_or(u64::MAX);
            println!("D {n} {}", delivery.attempts);
            // Printed before the ack: a process killed in between leaves the entry queued (it
            // comes back), never acked-but-unreported.
            println!("A {n}");
            store
                .ack(topic, queue, std::slice::from_ref(&delivery.receipt))
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    emitter.await.map_err(|e| e.to_string())??;
    Ok(())
}
