//! A page the example drives over CDP itself, with no executor: a browser context of its own,
//! attached, its `Page` events on — what a bare CDP client starts from.

use polaris::executor::chromium::cdp::{methods, Connection};

/// One page in a browser context of its own.
pub struct BarePage {
    /// The browser's connection.
    pub cdp: Connection,
    /// The page's session, for its commands.
    pub session: String,
    /// The page's target id (also its main frame's id).
    pub target: String,
    context: String,
}

impl BarePage {
    /// Opens `about:blank` in a new browser context and attaches to it.
    pub async fn open(cdp: &Connection) -> BarePage {
        let context = cdp
            .call(
                None,
                &methods::CreateBrowserContext {
                    dispose_on_detach: false,
                },
            )
            .await
            .unwrap()
            .browser_context_id;
        let target = cdp
            .call(
                None,
                &methods::CreateTarget {
                    url: "about:blank".into(),
                    browser_context_id: context.clone(),
                },
            )
            .await
            .unwrap()
            .target_id;
        let session = cdp
            .call(
                None,
                &methods::AttachToTarget {
                    target_id: target.clone(),
                    flatten: true,
                },
            )
            .await
            .unwrap()
            .session_id;
        let _signals = cdp.track(&session, &target);
        cdp.call(Some(&session), &methods::PageEnable {})
            .await
            .unwrap();
        BarePage {
            cdp: cdp.clone(),
            session,
            target,
            context,
        }
    }

    /// Closes the page and its browser context, as `task.finish` does.
    pub async fn close(self) {
        let _ = self
            .cdp
            .call(
                None,
                &methods::CloseTarget {
                    target_id: self.target,
                },
            )
            .await;
        let _ = self
            .cdp
            .call(
                None,
                &methods::DisposeBrowserContext {
                    browser_context_id: self.context,
                },
            )
            .await;
    }
}
