//! What the console tests share: a client that keeps the console's cookie and does not follow
//! redirects, logging in, and reading a page's CSRF token.

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;

use crate::support::server::TestServer;

/// A browser-like client of the console, without a browser: one login cookie, no redirects
/// followed (the tests read them).
pub struct Visitor<'a> {
    pub server: &'a TestServer,
    client: reqwest::Client,
    pub cookie: Option<String>,
}

impl<'a> Visitor<'a> {
    pub fn new(server: &'a TestServer) -> Visitor<'a> {
        Visitor {
            server,
            client: reqwest::Client::builder()
                .redirect(Policy::none())
                .build()
                .unwrap(),
            cookie: None,
        }
    }

    fn keep(&mut self, response: &reqwest::Response) {
        if let Some(set) = response.headers().get(SET_COOKIE) {
            let set = set.to_str().unwrap();
            let pair = set.split(';').next().unwrap().to_string();
            self.cookie = Some(pair);
        }
    }

    pub async fn get(&mut self, path: &str) -> reqwest::Response {
        let mut request = self.client.get(self.server.url(path));
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        let response = request.send().await.unwrap();
        self.keep(&response);
        response
    }

    /// POSTs a form, with extra headers.
    pub async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let encode = |text: &str| {
            percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        };
        let body: Vec<String> = form
            .iter()
            .map(|(name, value)| format!("{name}={}", encode(value)))
            .collect();
        let mut request = self
            .client
            .post(self.server.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.join("&"));
        if let Some(cookie) = &self.cookie {
            request = request.header(COOKIE, cookie);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        self.keep(&response);
        response
    }

    /// Logs in with `key`; the login must be taken.
    pub async fn log_in(&mut self, key: &str) {
        let response = self.post("/console/login", &[("key", key)], &[]).await;
        assert_eq!(response.status(), 303, "{:?}", response.text().await);
        assert_eq!(location(&response), "/console");
    }

    /// The body of a page that must answer 200.
    pub async fn page(&mut self, path: &str) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), 200, "{path}");
        response.text().await.unwrap()
    }
}

pub fn location(response: &reqwest::Response) -> String {
    response.headers()[LOCATION].to_str().unwrap().to_string()
}

/// The CSRF token the page's forms carry.
pub fn csrf(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("the page has a form")
        + 19;
    html[at..at + html[at..].find('"').unwrap()].to_string()
}
