//! Every bound operation, collected from the modules that declare them: each
//! area binds its fields beside them (`BINDINGS`), so adding an operation to
//! an area edits that area's file and no list here. An action
//! (`legalActions`) is spoken on each surface through the row its field is
//! bound by, and MCP's instructions teach the holder's loop from the same
//! declarations.

use std::sync::LazyLock;

use super::{agent_reads, query, reads, roster, shape, triage, units, work};
use crate::contract::{CLI_FILLS, Operation, Surface, kebab};
use crate::ledger::state_machine::{self, Action};

/// Every bound operation, in the order `tools/list` gives them.
pub static OPERATIONS: LazyLock<Vec<&'static Operation>> = LazyLock::new(|| {
    let areas: [&'static [Operation]; 7] = [
        work::BINDINGS,
        query::BINDINGS,
        agent_reads::BINDINGS,
        units::BINDINGS,
        reads::BINDINGS,
        triage::BINDINGS,
        roster::BINDINGS,
    ];
    areas.into_iter().flatten().collect()
});

pub fn tool(name: &str) -> Option<&'static Operation> {
    OPERATIONS.iter().copied().find(|op| op.tool == Some(name))
}

/// The rows of a CLI verb (`claim` is `claimNext`, or `claimUnit` with `--unit`).
pub fn verb(name: &str) -> impl Iterator<Item = &'static Operation> + use<'_> {
    OPERATIONS.iter().copied().filter(move |op| op.verb == Some(name))
}

/// The operation bound to `action` on a surface: the row of its field whose
/// presets the action fixes (the most specific one).
fn bound(action: &Action, surface: Surface) -> Option<&'static Operation> {
    OPERATIONS
        .iter()
        .copied()
        .filter(|op| op.field == action.field && op.binding(surface).is_some())
        .filter(|op| op.preset.iter().all(|preset| action.fixed.contains(preset)))
        .max_by_key(|op| op.preset.len())
}

/// `action` as the caller of `surface` writes it, or `None` when that
/// surface has no binding for it (triage's `unblock` in the agent CLI).
pub fn render_action(action: &Action, surface: Surface) -> Option<String> {
    if surface == Surface::Graphql {
        return Some(action.to_string());
    }
    let op = bound(action, surface)?;
    let name = op.binding(surface)?;
    let fixed = action.fixed.iter().filter(|fixed| !op.preset.contains(fixed));
    if surface == Surface::Mcp {
        let parts: Vec<String> = fixed
            .map(|(arg, value)| format!("{arg}: {value}"))
            .chain(action.needs.iter().map(|arg| (*arg).to_owned()))
            .collect();
        return Some(if parts.is_empty() { name.to_owned() } else { format!("{name}({})", parts.join(", ")) });
    }
    let mut words = vec![name.to_owned()];
    if op.field == "claimUnit" {
        words.push("--unit <unit-id>".to_owned());
    }
    for (arg, value) in fixed {
        if op.positional == Some(*arg) {
            words.push(value.to_ascii_lowercase());
        } else {
            words.push(format!("--{} {}", kebab(arg), value.to_ascii_lowercase()));
        }
    }
    for arg in action.needs.iter().filter(|arg| !CLI_FILLS.contains(arg)) {
        if op.positional == Some(*arg) {
            words.push(format!("<{}>", kebab(arg)));
        } else {
            words.push(format!("--{0} <{0}>", kebab(arg)));
        }
    }
    Some(words.join(" "))
}

/// The holder's loop in `surface`'s words, one line per state in which a
/// holder acts: `- IN_PROGRESS: heartbeat(attemptId), verify(evidenceUrl),
/// ...: what to do.`, the actions from their declarations
/// ([`state_machine::holder_actions`]), which also give the holder its
/// `legalActions`, and what to do from the state's own description in the
/// schema (`WorkState`).
pub fn holder_loop(surface: Surface) -> String {
    let lines = state_machine::holder_states().into_iter().map(|state| {
        let actions: Vec<String> = state_machine::holder_actions(state)
            .into_iter()
            .filter_map(|action| render_action(action, surface))
            .collect();
        let says = shape::enum_value_doc("WorkState", state.api_name()).unwrap_or_default();
        format!("- {}: {}: {}", state.api_name(), actions.join(", "), says.replace('\n', " "))
    });
    lines.collect::<Vec<_>>().join("\n")
}

/// The MCP tools whose `attemptId` fences the write to the caller's
/// attempt (the field's argument takes the shared fence description,
/// `$fence` in work.rs), as prose: `start_work`, `verify`, ... and `dispose`.
pub fn fenced_tools() -> String {
    let fenced = OPERATIONS.iter().filter(|op| {
        op.args().iter().any(|arg| {
            arg.name == "attemptId"
                && !arg.required
                && arg.description.as_deref().is_some_and(|d| d.starts_with("Your current attempt:"))
        })
    });
    let names: Vec<String> = fenced.filter_map(|op| op.tool).map(|tool| format!("`{tool}`")).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Every binding as a comment block for the end of `schema.graphql`
/// ([`super::schema_file`]): MCP tool, CLI verb, GraphQL field with the
/// arguments the binding fixes, who may call it and the first sentence of
/// what it does, so the reference of every surface is printed from the
/// declarations and a change to a binding shows in review with the schema.
pub fn reference() -> String {
    let mut out = String::from(
        "# The operations bound on MCP and the agent CLI (`BINDINGS` beside each field, collected in\n\
         # src/graphql/bindings.rs), one per line: the MCP tool, the `work-ledger agent` verb (- for none),\n\
         # the GraphQL field with the arguments the binding fixes, the permissions that may call it, and\n\
         # what it does. Generated with the SDL above: `work-ledger print-schema`.\n#\n",
    );
    for op in OPERATIONS.iter() {
        let fixed: Vec<String> = op.preset.iter().map(|(arg, value)| format!("{arg}: {value}")).collect();
        let field = if fixed.is_empty() { op.field.to_owned() } else { format!("{}({})", op.field, fixed.join(", ")) };
        let needs: Vec<&str> = op.needs.iter().map(|p| p.as_str()).collect();
        out.push_str(&format!(
            "# {} | {} | {field} | {} | {}\n",
            op.tool.unwrap_or("-"),
            op.verb.unwrap_or("-"),
            needs.join(" or "),
            op.summary(Surface::Mcp)
        ));
    }
    out
}

/// A GraphQL action string (as `legalActions` and error extensions carry
/// it) in another surface's language; `None` when that surface has no such
/// operation. Strings this module does not know pass through unchanged.
pub fn translate(graphql: &str, surface: Surface) -> Option<String> {
    match state_machine::actions().find(|action| action.to_string() == graphql) {
        Some(action) => render_action(action, surface),
        None => Some(graphql.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Permission;
    use crate::ledger::{claims, lifecycle};

    #[test]
    fn every_action_has_a_tool_and_every_agent_action_a_verb() {
        for action in state_machine::actions() {
            assert!(render_action(action, Surface::Mcp).is_some(), "no MCP tool for {action}");
            // The agent CLI is for agents: what an agent's token may do has a verb.
            let for_agents = bound(action, Surface::Mcp).is_some_and(|op| op.needs.contains(&Permission::UnitsClaim));
            if for_agents {
                assert!(render_action(action, Surface::Cli).is_some(), "no CLI verb for {action}");
            }
        }
    }

    #[test]
    fn actions_speak_the_surface_language() {
        use lifecycle::act::{DISPOSE_ABANDON, START, VERIFY};
        assert_eq!(render_action(&START, Surface::Mcp).as_deref(), Some("start_work"));
        assert_eq!(render_action(&VERIFY, Surface::Mcp).as_deref(), Some("verify(evidenceUrl)"));
        assert_eq!(render_action(&VERIFY, Surface::Cli).as_deref(), Some("verify <evidence-url>"));
        assert_eq!(
            render_action(&DISPOSE_ABANDON, Surface::Cli).as_deref(),
            Some("dispose dropped|deferred|dead --evidence-url <evidence-url>")
        );
        assert_eq!(render_action(&claims::act::HEARTBEAT, Surface::Cli).as_deref(), Some("heartbeat"));
        assert_eq!(translate("transition(to: IN_PROGRESS)", Surface::Cli).as_deref(), Some("start"));
    }

    #[test]
    fn tool_names_are_unique() {
        let mut names: Vec<&str> = OPERATIONS.iter().filter_map(|op| op.tool).collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count);
        // The rows the agent CLI reads a unit and its status through.
        assert!(tool("get_unit").is_some() && verb("status").next().is_some());
    }

    #[test]
    fn the_fenced_tools_are_read_from_their_arguments() {
        let fenced = fenced_tools();
        for tool in ["`start_work`, ", "`verify`", "`block`", "`release`", " and `dispose`"] {
            assert!(fenced.contains(tool), "{tool} in {fenced}");
        }
        for tool in ["heartbeat", "record_cost", "claim"] {
            assert!(!fenced.contains(tool), "{tool} is not fenced: {fenced}");
        }
    }

    #[test]
    fn every_state_of_the_loop_says_what_to_do() {
        for state in state_machine::holder_states() {
            let says = shape::enum_value_doc("WorkState", state.api_name());
            assert!(says.is_some_and(|s| s.ends_with('.')), "WorkState.{} has no sentence", state.api_name());
        }
        assert!(holder_loop(Surface::Mcp).contains("- BLOCKED: wait_for_answer, release"));
    }
}
