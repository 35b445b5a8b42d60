//! The console in a real headless Chromium, driven over WebDriver (Debian's `chromium` and
//! `chromium-driver`; `scripts/test` installs them and names the driver in
//! `SKILLGATE_TEST_CHROMEDRIVER`): an admin logs in with a key, sees a run appear in the list
//! live after a request, opens it and sees the onion's waterfall, and replays a dead letter
//! and sees its new run. The run page's screenshot is saved as an artifact
//! (`target/artifacts/console-run.png`).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use skillgate::events::{Event, KernelBus};

use crate::support::common::Project;
use crate::support::server::TestServer;

/// A hang guard on waits that end only if the console works.
const GUARD: Duration = Duration::from_secs(30);

/// Chromium's WebDriver, or `None` (the test is skipped) where it is not installed.
fn chromedriver() -> Option<PathBuf> {
    crate::support::common::provided_tool(
        "SKILLGATE_TEST_CHROMEDRIVER",
        "SKILLGATE_REQUIRE_CHROMEDRIVER",
        "chromium-driver",
    )
}

/// A chromedriver process, stopped when dropped.
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts chromedriver on a free port and a headless Chromium session through it.
async fn browser(driver: &PathBuf) -> (Driver, Client) {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let driver = Driver(child);
    let mut options = json!({
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,900"],
    });
    if let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
    {
        options["binary"] = json!(chromium);
    }
    let mut capabilities = serde_json::Map::new();
    capabilities.insert("goog:chromeOptions".into(), options);
    let url = format!("http://127.0.0.1:{port}");
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let client = tokio::time::timeout(GUARD, async {
        loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return client,
                // The driver is not listening yet.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("a Chromium session starts");
    (driver, client)
}

/// A server with keys whose `deploy` handler fails while `broken` holds (deliveries tried twice)
/// and a skill that fails.
async fn start(broken: Arc<AtomicBool>) -> TestServer {
    let project = Project::new();
    project.skill(
        "boom.skill.js",
        "export const frontmatter = { description: 'Fails.' };\nexport default async () => { throw new Error('the database is down'); };\n",
    );
    crate::runs::dead::start(project, broken).await
}

/// The rows of the runs list, as their text.
async fn rows(browser: &Client) -> Vec<(String, fantoccini::elements::Element)> {
    let mut found = Vec::new();
    for row in browser.find_all(Locator::Css("#runs tr")).await.unwrap() {
        found.push((row.text().await.unwrap(), row));
    }
    found
}

/// Waits until the list has a row whose text holds every one of `words`, refreshing the page
/// every few seconds when `refresh`; returns the row.
async fn row_with(
    browser: &Client,
    words: &[&str],
    refresh: bool,
) -> fantoccini::elements::Element {
    tokio::time::timeout(GUARD, async {
        for round in 0u32.. {
            for (text, row) in rows(browser).await {
                if words.iter().all(|w| text.contains(w)) {
                    return row;
                }
            }
            if refresh && round % 10 == 9 {
                browser.refresh().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        unreachable!()
    })
    .await
    .unwrap_or_else(|_| panic!("no row with {words:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_logs_in_sees_a_run_arrive_live_opens_its_waterfall_and_replays_a_dead_letter() {
    let Some(driver) = chromedriver() else { return };
    let broken = Arc::new(AtomicBool::new(true));
    let server = start(broken.clone()).await;
    let (_driver, browser) = browser(&driver).await;

    // Without a login the console sends the visitor to its login form.
    browser.goto(&server.url("/console")).await.unwrap();
    assert_eq!(
        browser.current_url().await.unwrap().path(),
        "/console/login"
    );
    let key = browser.find(Locator::Id("key")).await.unwrap();
    key.send_keys("sg_ops_key").await.unwrap();
    browser
        .find(Locator::Css("main form button[type=submit]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .at_most(GUARD)
        .for_element(Locator::Id("runs"))
        .await
        .unwrap();
    assert_eq!(browser.current_url().await.unwrap().path(), "/console");

    // A request comes in (as curl would send it): its run appears without a reload.
    let response = server
        .post_json_as("sg_ci_key", "/invoke/boom", &json!({}))
        .await;
    assert_eq!(response.status(), 500);
    let row = row_with(&browser, &["boom", "failed", "key:ci"], false).await;
    assert!(
        row.attr("class")
            .await
            .unwrap()
            .unwrap_or_default()
            .contains("new"),
        "the row was added by the live list, not a reload"
    );

    // Its page: the summary and the onion as a waterfall.
    row.find(Locator::Css("a"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let waterfall = browser
        .wait()
        .at_most(GUARD)
        .for_element(Locator::Id("waterfall"))
        .await
        .unwrap();
    let entries = waterfall.find_all(Locator::Css("li")).await.unwrap();
    assert!(!entries.is_empty());
    let failed = waterfall
        .find_all(Locator::Css("li.failed .bar"))
        .await
        .unwrap();
    assert!(!failed.is_empty(), "the failed entry is marked");
    let status = browser.find(Locator::Id("status")).await.unwrap();
    assert_eq!(status.text().await.unwrap(), "failed");
    let page = browser.source().await.unwrap();
    assert!(
        page.contains("the database is down"),
        "the admin reads the error"
    );
    let png = browser.screenshot().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let artifacts = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    std::fs::write(artifacts.join("console-run.png"), &png).unwrap();

    // An event whose handler keeps failing dies; replayed once the handler works, it runs.
    let mut event = Event::new("deploy", "release");
    event.data = Some(json!({ "version": "1.2.3" }));
    server.kernel.bus().emit(&event).await.unwrap();
    crate::runs::dead::until_dead(&server).await;
    broken.store(false, Ordering::SeqCst);
    browser.goto(&server.url("/console/dead")).await.unwrap();
    let letters = browser.source().await.unwrap();
    assert!(letters.contains(&event.id), "the letter shows its event");
    browser
        .find(Locator::Css("button.replay"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .at_most(GUARD)
        .for_element(Locator::Id("runs"))
        .await
        .unwrap();
    let url = browser.current_url().await.unwrap();
    assert_eq!(url.path(), "/console");
    assert!(
        url.query().unwrap_or_default().contains("replayed="),
        "{url}"
    );
    row_with(&browser, &["deployer", "ok", "event"], true).await;
    browser.goto(&server.url("/console/dead")).await.unwrap();
    browser
        .wait()
        .at_most(GUARD)
        .for_element(Locator::Id("no-letters"))
        .await
        .unwrap();
    browser.close().await.unwrap();
}
