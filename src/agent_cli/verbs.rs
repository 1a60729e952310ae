//! The agent CLI's grammar, derived from the operation contract: one verb
//! per bound operation (`claim`, `start`, `verify`, ...), its help the
//! GraphQL field's documentation, its flags the field's arguments (in
//! kebab-case; a `...Seconds` argument takes a duration like `15m`), its
//! positional argument the one the contract names. The arguments the CLI
//! fills itself (the unit, the attempt, the idempotency key) are not flags.

use clap::builder::PossibleValuesParser;
use clap::error::ErrorKind;
use clap::{Arg, ArgAction, ArgMatches, Command, FromArgMatches, Subcommand};
use serde_json::{Map, Value, json};

use crate::contract::{CLI_FILLS, Operation, Surface, kebab};
use crate::graphql::bindings::OPERATIONS;
use crate::graphql::shape::{self, Arg as FieldArg};

/// Flags every verb has already (the connection): a field argument never
/// takes their names.
const GLOBAL_FLAGS: &[&str] = &["url", "token", "unit", "retries", "retry-backoff", "timeout", "state"];

/// The verb a command line chose, with its own arguments.
#[derive(Debug, Clone)]
pub struct Verb {
    pub name: String,
    pub matches: ArgMatches,
}

impl FromArgMatches for Verb {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        match matches.subcommand() {
            Some((name, sub)) => Ok(Verb { name: name.to_owned(), matches: sub.clone() }),
            None => Err(clap::Error::raw(ErrorKind::MissingSubcommand, "name a verb: see --help")),
        }
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Subcommand for Verb {
    fn augment_subcommands(cmd: Command) -> Command {
        cmd.subcommands(verb_names().map(command))
    }

    fn augment_subcommands_for_update(cmd: Command) -> Command {
        Self::augment_subcommands(cmd)
    }

    fn has_subcommand(name: &str) -> bool {
        verb_names().any(|verb| verb == name)
    }
}

/// The verbs, in the contract's order, each once.
fn verb_names() -> impl Iterator<Item = &'static str> {
    let mut seen = Vec::new();
    OPERATIONS.iter().filter_map(|op| op.verb).filter(move |verb| {
        let new = !seen.contains(verb);
        seen.push(*verb);
        new
    })
}

/// A verb's arguments: those of its operations, less what the CLI fills.
fn verb_args(verb: &str) -> Vec<(&'static Operation, FieldArg)> {
    let mut args: Vec<(&'static Operation, FieldArg)> = Vec::new();
    for op in crate::graphql::bindings::verb(verb) {
        for arg in op.args() {
            if !CLI_FILLS.contains(&arg.name.as_str()) && !args.iter().any(|(_, seen)| seen.name == arg.name) {
                args.push((op, arg));
            }
        }
    }
    args
}

/// The flag of a field argument: `evidenceUrl` -> `evidence-url`,
/// `leaseSeconds` -> `lease` (it takes a duration).
pub fn flag(arg: &str) -> String {
    let long = kebab(arg);
    match long.strip_suffix("-seconds") {
        Some(short) if !GLOBAL_FLAGS.contains(&short) => short.to_owned(),
        _ => long,
    }
}

fn command(verb: &'static str) -> Command {
    let ops: Vec<&Operation> = crate::graphql::bindings::verb(verb).collect();
    let about = ops.first().map(|op| op.description(Surface::Cli)).unwrap_or_default();
    let summary = ops.first().map(|op| op.summary(Surface::Cli)).unwrap_or_default();
    let mut command = Command::new(verb).about(summary).long_about(about);
    for (op, arg) in verb_args(verb) {
        let mut help = arg.description.clone().unwrap_or_default();
        if value_name(&arg) == "DURATION" {
            help.push_str(" Here a duration: 90s, 15m, 1h (a bare number is seconds).");
        }
        let mut cli = if op.positional == Some(arg.name.as_str()) {
            Arg::new(arg.name.clone()).required(true).value_name(kebab(&arg.name).to_uppercase())
        } else {
            Arg::new(arg.name.clone()).long(flag(&arg.name)).action(ArgAction::Set).value_name(value_name(&arg))
        };
        cli = cli.help(help).allow_negative_numbers(arg.base() == "Int");
        if let Some(values) = shape::enum_values(arg.base()) {
            let lower: Vec<String> = values.iter().map(|v| v.to_ascii_lowercase()).collect();
            cli = cli.value_parser(PossibleValuesParser::new(lower)).ignore_case(true);
        }
        command = command.arg(cli);
    }
    command
}

/// What a flag takes, as help shows it: `DURATION` for `...Seconds`, else the GraphQL type.
fn value_name(arg: &FieldArg) -> String {
    if arg.base() == "Int" && arg.name.ends_with("Seconds") { "DURATION".to_owned() } else { arg.base().to_uppercase() }
}

/// The arguments a command line gave, as GraphQL variables of `op`.
pub fn given(op: &Operation, matches: &ArgMatches) -> Result<Map<String, Value>, String> {
    let mut given = Map::new();
    for arg in op.args() {
        let Ok(Some(text)) = matches.try_get_one::<String>(&arg.name) else { continue };
        let value = match arg.base() {
            "Int" if arg.name.ends_with("Seconds") => {
                let seconds = crate::duration::parse(text)?.as_secs();
                json!(seconds)
            }
            "Int" => json!(text.parse::<i64>().map_err(|_| format!("`{text}` is not a whole number"))?),
            "Boolean" => json!(text.parse::<bool>().map_err(|_| format!("`{text}` is not true or false"))?),
            base if shape::enum_values(base).is_some() => json!(text.to_ascii_uppercase()),
            _ => json!(text),
        };
        given.insert(arg.name.clone(), value);
    }
    Ok(given)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_is_well_formed_and_offers_no_server_flags() {
        let cli = Verb::augment_subcommands(Command::new("agent").arg(Arg::new("url").long("url").global(true)));
        cli.clone().debug_assert();
        let verify = cli.find_subcommand("verify").expect("verify");
        assert!(verify.get_arguments().any(|a| a.get_id() == "evidenceUrl" && a.is_positional()));
        assert!(!verify.get_arguments().any(|a| a.get_id() == "attemptId" || a.get_id() == "idempotencyKey"));
        let claim = cli.find_subcommand("claim").expect("claim");
        assert!(claim.get_arguments().any(|a| a.get_long() == Some("lease")));
        assert!(!claim.get_arguments().any(|a| a.get_long() == Some("database-url")));
    }
}
