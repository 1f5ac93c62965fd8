//! The borrowed fill: the executor's work of an execution, its strings still the frame's
//! until the execution outlives the frame.

use crate::protocol::{
    ActCommand, CloseCommand, Command, ExecutorCommand, Expect, FrameCommand, Method, PageAction,
    ReadCommand, Target,
};

/// What an execution asks of the executor: a `page.fill` whose strings are still the frame's,
/// or any executor command, owned. A fill the executor does at once reads the frame's strings
/// where they are, so a fresh fill allocates nothing for its command; they are copied only for
/// an execution that outlives its frame ([`Execution::into_owned`]) or that the executor
/// starts as a future.
pub(crate) enum Work<'a> {
    /// `page.fill`, its params borrowed from the frame.
    Fill {
        /// The task whose page is filled.
        task_id: &'a str,
        /// The field selector.
        target: &'a str,
        /// The text to put in the field.
        value: &'a str,
    },
    /// Any executor command, owned.
    Owned(ExecutorCommand),
}

impl<'a> Work<'a> {
    /// The executor's work of a frame's checked command (`Ok`), a task closing (`Err(Err)`),
    /// or a read (`Err(Ok)`). A fill's strings stay the frame's: they are copied only if its
    /// execution outlives the frame.
    #[inline]
    pub(crate) fn of(cmd: FrameCommand<'a>) -> Result<Result<Work<'a>, CloseCommand>, ReadCommand> {
        match cmd {
            FrameCommand::Fill {
                task_id,
                target,
                value,
            } => Ok(Ok(Work::Fill {
                task_id,
                target,
                value,
            })),
            FrameCommand::Owned(Command::Read(read)) => Err(read),
            FrameCommand::Owned(Command::Execute(work)) => Ok(Ok(Work::Owned(work))),
            FrameCommand::Owned(Command::Close(close)) => Ok(Err(close)),
        }
    }
}

impl Work<'_> {
    /// The method the command came from.
    pub(crate) fn method(&self) -> Method {
        match self {
            Work::Fill { .. } => Method::PageFill,
            Work::Owned(c) => c.method(),
        }
    }

    /// The task acted on; `None` for `task.start`.
    pub(crate) fn task_id(&self) -> Option<&str> {
        match self {
            Work::Fill { task_id, .. } => Some(task_id),
            Work::Owned(c) => c.task_id(),
        }
    }

    /// A fill's task, target and value, borrowed or owned; `None` for any other command.
    pub(crate) fn fill(&self) -> Option<(&str, &str, &str)> {
        match self {
            Work::Fill {
                task_id,
                target,
                value,
            } => Some((task_id, target, value)),
            // A fill of another tab than the first is no fast-path fill: the executor's
            // `act_in` addresses the tab.
            Work::Owned(ExecutorCommand::Act(ActCommand {
                task_id,
                tab: 0,
                action:
                    PageAction::Fill {
                        target: Target::Css(target),
                        value,
                    },
            })) => Some((task_id, target, value)),
            Work::Owned(_) => None,
        }
    }

    /// The page action, when the command is one (a borrowed fill is not: see [`Work::fill`]).
    pub(crate) fn action(&self) -> Option<&PageAction> {
        match self {
            Work::Owned(ExecutorCommand::Act(a)) => Some(&a.action),
            _ => None,
        }
    }

    /// Whether this is a `page.fill`.
    pub(crate) fn is_fill(&self) -> bool {
        self.fill().is_some()
    }

    /// Whether the caller sent a click or a key press as a local step (`local: true`).
    pub(crate) fn is_local_step(&self) -> bool {
        match self {
            Work::Owned(ExecutorCommand::Act(ActCommand {
                action: a @ (PageAction::Click { .. } | PageAction::Press { .. }),
                ..
            })) => a.is_local(),
            _ => false,
        }
    }

    /// The same work owning its strings.
    pub(crate) fn owned(self) -> Work<'static> {
        Work::Owned(self.into_owned())
    }

    /// The owned command.
    pub(crate) fn into_owned(self) -> ExecutorCommand {
        match self {
            Work::Fill {
                task_id,
                target,
                value,
            } => ExecutorCommand::Act(ActCommand {
                task_id: task_id.to_owned(),
                tab: 0,
                action: PageAction::Fill {
                    target: Target::Css(target.to_owned()),
                    value: value.to_owned(),
                },
            }),
            Work::Owned(c) => c,
        }
    }

    /// The observation that shows the command took effect ([`ExecutorCommand::expectation`]).
    pub(crate) fn expectation(&self) -> Option<Expect> {
        match self {
            Work::Owned(c) => c.expectation(),
            Work::Fill {
                task_id,
                target,
                value,
            } => Work::Fill {
                task_id,
                target,
                value,
            }
            .into_owned()
            .expectation(),
        }
    }
}
