//! What a bound operation looks like on MCP and the CLI, derived from its
//! GraphQL field: the arguments (name, type, documentation, required), the
//! tool's input JSON Schema, and the GraphQL document a call sends. Read from
//! the schema's own SDL, so a change to a resolver is a change to every
//! surface. It lives with the schema it reads rather than in the contract
//! whose rows it shapes, so the contract stays below the schema.

use std::collections::HashMap;
use std::sync::OnceLock;

use async_graphql::parser::types::{BaseType, Type, TypeKind, TypeSystemDefinition};
use serde_json::{Map, Value, json};

use super::bindings::OPERATIONS;
use crate::contract::{Operation, Root, SCALARS, Surface, UNIT};
use crate::ledger::LedgerError;

/// One argument of a field.
#[derive(Debug, Clone)]
pub struct Arg {
    pub name: String,
    /// The GraphQL type as written in the SDL (`UUID!`, `[EventType!]`).
    pub ty: String,
    pub description: Option<String>,
    /// Non-null and without a default: a call must give it.
    pub required: bool,
    base: String,
    list: bool,
}

#[derive(Debug)]
pub struct FieldShape {
    pub description: Option<String>,
    pub args: Vec<Arg>,
    /// The named type of the result, under list and non-null wrappers.
    result: String,
}

#[derive(Default)]
struct Shapes {
    fields: HashMap<(&'static str, String), FieldShape>,
    enums: HashMap<String, Vec<String>>,
    /// (enum type, value) -> the value's description.
    enum_docs: HashMap<(String, String), String>,
    /// Object type -> its fields without arguments whose type is a scalar
    /// or an enum, in the order the schema declares them.
    scalars: HashMap<String, Vec<String>>,
}

fn shapes() -> &'static Shapes {
    static SHAPES: OnceLock<Shapes> = OnceLock::new();
    SHAPES.get_or_init(|| read(&super::sdl()))
}

fn read(sdl: &str) -> Shapes {
    let mut shapes = Shapes::default();
    // The SDL is the server's own; a parse failure leaves no shapes, and
    // every binding then answers INTERNAL (a unit test parses it).
    let Ok(document) = async_graphql::parser::parse_schema(sdl) else { return shapes };
    let mut objects: HashMap<String, Vec<(String, String)>> = HashMap::new();
    let mut leaves: Vec<String> = ["String", "Int", "Float", "Boolean", "ID"].map(str::to_owned).to_vec();
    for definition in document.definitions {
        let TypeSystemDefinition::Type(definition) = definition else { continue };
        let definition = definition.node;
        let name = definition.name.node.to_string();
        match definition.kind {
            TypeKind::Scalar => leaves.push(name),
            TypeKind::Enum(values) => {
                leaves.push(name.clone());
                for value in &values.values {
                    if let Some(doc) = &value.node.description {
                        shapes.enum_docs.insert((name.clone(), value.node.value.node.to_string()), doc.node.clone());
                    }
                }
                shapes.enums.insert(name, values.values.iter().map(|v| v.node.value.node.to_string()).collect());
            }
            TypeKind::Object(object) if name != "Query" && name != "Mutation" => {
                let fields = object.fields.iter().filter(|field| field.node.arguments.is_empty());
                let fields = fields.map(|field| (field.node.name.node.to_string(), base_of(&field.node.ty.node).0));
                objects.insert(name, fields.collect());
            }
            TypeKind::Object(object) => {
                let root = if name == "Query" { "Query" } else { "Mutation" };
                for field in object.fields {
                    let field = field.node;
                    let args = field
                        .arguments
                        .iter()
                        .map(|arg| {
                            let arg = &arg.node;
                            let (base, list) = base_of(&arg.ty.node);
                            Arg {
                                name: arg.name.node.to_string(),
                                ty: arg.ty.node.to_string(),
                                description: arg.description.as_ref().map(|d| d.node.clone()),
                                required: !arg.ty.node.nullable && arg.default_value.is_none(),
                                base,
                                list,
                            }
                        })
                        .collect();
                    let result = base_of(&field.ty.node).0;
                    let shape = FieldShape { description: field.description.map(|d| d.node), args, result };
                    shapes.fields.insert((root, field.name.node.to_string()), shape);
                }
            }
            _ => {}
        }
    }
    for (name, fields) in &objects {
        let scalars = fields.iter().filter(|(_, ty)| leaves.contains(ty)).map(|(field, _)| field.clone());
        shapes.scalars.insert(name.clone(), scalars.collect());
    }
    shapes
}

fn base_of(ty: &Type) -> (String, bool) {
    match &ty.base {
        BaseType::Named(name) => (name.to_string(), false),
        BaseType::List(inner) => (base_of(inner).0, true),
    }
}

impl Operation {
    fn root_name(&self) -> &'static str {
        match self.root {
            Root::Query => "Query",
            Root::Mutation => "Mutation",
        }
    }

    fn field_shape(&self) -> Option<&'static FieldShape> {
        shapes().fields.get(&(self.root_name(), self.field.to_owned()))
    }

    /// The GraphQL field behind this binding (a unit test checks every row has one).
    pub fn shape(&self) -> Result<&'static FieldShape, LedgerError> {
        self.field_shape()
            .ok_or_else(|| LedgerError::internal(format!("operation `{}` has no GraphQL field", self.field)))
    }

    /// The arguments a caller of this binding gives (the field's, less the
    /// presets and what it omits), under the binding's names.
    pub fn args(&self) -> Vec<Arg> {
        let Some(shape) = self.field_shape() else { return Vec::new() };
        let given = shape.args.iter().filter(|arg| {
            !self.preset.iter().any(|(name, _)| *name == arg.name) && !self.omits.contains(&arg.name.as_str())
        });
        given
            .map(|arg| match self.renamed.iter().find(|(_, field)| *field == arg.name) {
                Some((name, _)) => Arg { name: (*name).to_owned(), ..arg.clone() },
                None => arg.clone(),
            })
            .collect()
    }

    /// The field's name of an argument this binding calls `name`.
    fn field_arg<'a>(&self, name: &'a str) -> &'a str {
        self.renamed.iter().find(|(ours, _)| *ours == name).map_or(name, |(_, field)| field)
    }

    /// What the binding does on `surface`: its own documentation, or the
    /// field's followed by the binding's note; on MCP and the CLI in their
    /// words ([`in_words_of`]).
    pub fn description(&self, surface: Surface) -> String {
        let field = self.field_shape().and_then(|shape| shape.description.clone()).unwrap_or_default();
        let field = if self.doc.is_empty() { field } else { self.doc.to_owned() };
        let text = match (field.is_empty(), self.note.is_empty()) {
            (_, true) => field,
            (true, false) => self.note.to_owned(),
            (false, false) => format!("{field}\n\n{}", self.note),
        };
        in_words_of(&text, surface)
    }

    /// The first sentence of [`Self::description`], on one line (a verb's
    /// line in `--help`, a tool's in the quick start).
    pub fn summary(&self, surface: Surface) -> String {
        let text = self.description(surface);
        let paragraph = text.split("\n\n").next().unwrap_or_default();
        let line = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
        // The first ". " that ends a sentence, not an abbreviation ("e.g. ").
        let end = line.match_indices(". ").map(|(at, _)| at).find(|at| !line[..*at].ends_with("e.g"));
        match end {
            Some(end) => line[..=end].to_owned(),
            None => line,
        }
    }

    /// The MCP tool's input: a JSON Schema object of the arguments.
    pub fn input_schema(&self) -> Map<String, Value> {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for arg in self.args() {
            let mut schema = json_type(&arg.base);
            if arg.list {
                schema = json!({ "type": "array", "items": schema });
            }
            if let (Some(description), Value::Object(fields)) = (&arg.description, &mut schema) {
                fields.insert("description".into(), json!(description));
            }
            properties.insert(arg.name.clone(), schema);
            if arg.required {
                required.push(json!(arg.name));
            }
        }
        let mut schema = Map::new();
        schema.insert("type".into(), json!("object"));
        schema.insert("properties".into(), Value::Object(properties));
        schema.insert("required".into(), Value::Array(required));
        schema.insert("additionalProperties".into(), json!(false));
        schema
    }

    /// The GraphQL document a call with `given` arguments sends: one
    /// variable per given argument, the presets as literals, the result
    /// aliased `result`. An unknown or missing argument is INVALID_INPUT
    /// naming it, before anything runs.
    pub fn document(&self, given: &Map<String, Value>, surface: Surface) -> Result<String, LedgerError> {
        self.shape()?;
        let args = self.args();
        if let Some(unknown) = given.keys().find(|name| !args.iter().any(|arg| &arg.name == *name)) {
            let known: Vec<&str> = args.iter().map(|arg| arg.name.as_str()).collect();
            return Err(LedgerError::invalid(
                unknown.clone(),
                format!("not an argument of this operation; it takes: {}", known.join(", ")),
            ));
        }
        if let Some(missing) = args.iter().find(|arg| arg.required && given.get(&arg.name).is_none_or(Value::is_null)) {
            let what = missing.description.as_deref().unwrap_or("see the input schema");
            return Err(LedgerError::invalid(missing.name.clone(), format!("required ({}): {what}", missing.ty)));
        }
        let used: Vec<&Arg> = args.iter().filter(|arg| given.contains_key(&arg.name)).collect();
        let variables: Vec<String> = used.iter().map(|arg| format!("${}: {}", arg.name, arg.ty)).collect();
        let passed = used
            .iter()
            .map(|arg| format!("{}: ${}", self.field_arg(&arg.name), arg.name))
            .chain(self.preset.iter().map(|(name, value)| format!("{name}: {value}")));
        let passed: Vec<String> = passed.collect();
        let keyword = match self.root {
            Root::Query => "query",
            Root::Mutation => "mutation",
        };
        let declared = if variables.is_empty() { String::new() } else { format!("({})", variables.join(", ")) };
        let call = if passed.is_empty() { String::new() } else { format!("({})", passed.join(", ")) };
        Ok(format!("{keyword}{declared} {{ result: {}{call} {} }}", self.field, self.selection_in(surface)?))
    }

    /// The selection of the result on `surface`: `$UNIT` is [`UNIT`],
    /// `SURFACE` the surface's name, and [`SCALARS`] every field of the
    /// result's type that is a scalar or an enum (so a column added to a
    /// view's type is read without naming it here).
    fn selection_in(&self, surface: Surface) -> Result<String, LedgerError> {
        if self.selection != SCALARS {
            return Ok(self.selection.replace("$UNIT", UNIT).replace("SURFACE", surface.api_name()));
        }
        let fields = self.field_shape().and_then(|shape| shapes().scalars.get(&shape.result));
        match fields {
            Some(fields) if !fields.is_empty() => Ok(format!("{{ {} }}", fields.join(" "))),
            _ => Err(LedgerError::internal(format!("`{}` has no scalar fields to select", self.field))),
        }
    }
}

/// `text` (a field's documentation) as a caller of `surface` reads it. The
/// response's extensions are fields of the result on MCP and the CLI
/// ([`super::envelope::result`]): "the response's `extensions.claim`" is
/// "the result" there and `extensions.claim.outcome` is `outcome`. A field
/// named in backquotes is its tool or verb when it has exactly one.
fn in_words_of(text: &str, surface: Surface) -> String {
    if surface == Surface::Graphql {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    // Odd parts are quoted, even parts are prose.
    for (i, part) in text.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
            continue;
        }
        let Some(path) = part.strip_prefix("extensions.") else {
            out.push('`');
            out.push_str(surface_name(part, surface).unwrap_or(part));
            out.push('`');
            continue;
        };
        let field = path.split_once('.').map(|(_, field)| field);
        for (said, result) in [("the response's ", "the result"), ("The response's ", "The result")] {
            if let Some(kept) = out.strip_suffix(said) {
                out = format!("{kept}{result}{}", if field.is_some() { "'s " } else { "" });
            }
        }
        if let Some(field) = field {
            out.push('`');
            out.push_str(field);
            out.push('`');
        }
    }
    out
}

/// The tool or verb of a root field that has exactly one on `surface`.
fn surface_name(field: &str, surface: Surface) -> Option<&'static str> {
    let mut bound = OPERATIONS.iter().filter(|op| op.field == field).filter_map(|op| op.binding(surface));
    let first = bound.next()?;
    bound.all(|other| other == first).then_some(first)
}

/// A GraphQL input type as JSON Schema.
fn json_type(base: &str) -> Value {
    match base {
        "String" => json!({ "type": "string" }),
        "Int" => json!({ "type": "integer" }),
        "Float" => json!({ "type": "number" }),
        "Boolean" => json!({ "type": "boolean" }),
        "UUID" => json!({ "type": "string", "format": "uuid" }),
        "DateTime" => json!({ "type": "string", "format": "date-time" }),
        other => match shapes().enums.get(other) {
            Some(values) => json!({ "type": "string", "enum": values }),
            None => json!({ "type": "object" }),
        },
    }
}

/// The enum values of a GraphQL enum type (for the CLI's value checks).
pub fn enum_values(type_name: &str) -> Option<&'static [String]> {
    shapes().enums.get(type_name).map(Vec::as_slice)
}

/// The description of one value of a GraphQL enum type (its doc comment).
pub fn enum_value_doc(type_name: &str, value: &str) -> Option<&'static str> {
    shapes().enum_docs.get(&(type_name.to_owned(), value.to_owned())).map(String::as_str)
}

impl Arg {
    /// The named type under any list and non-null wrappers.
    pub fn base(&self) -> &str {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binding_names_a_field_and_its_presets_are_arguments() {
        for op in OPERATIONS.iter() {
            let shape = op.shape().unwrap_or_else(|_| panic!("no field {}", op.field));
            for (preset, _) in op.preset {
                assert!(shape.args.iter().any(|arg| arg.name == *preset), "{}: no argument {preset}", op.field);
            }
            for omitted in op.omits {
                let arg = shape.args.iter().find(|arg| arg.name == *omitted);
                assert!(
                    arg.is_some_and(|arg| !arg.required),
                    "{}: omits {omitted}, not an optional argument",
                    op.field
                );
            }
            if let Some(positional) = op.positional {
                assert!(op.args().iter().any(|arg| arg.name == positional), "{}: positional {positional}", op.field);
            }
            assert!(!op.description(Surface::Mcp).is_empty(), "{} has no documentation", op.field);
        }
    }

    #[test]
    fn a_scalars_selection_reads_every_scalar_field_of_the_result() {
        let depth = super::super::bindings::tool("queue_depth").expect("queue_depth");
        let document = depth.document(&Map::new(), Surface::Mcp).expect("document");
        // Every column of the view, whatever states there are, and nothing that is an object.
        let selected = document.split("queueDepth {").nth(1).unwrap_or_default();
        for field in ["domain", "ready", "claimed", "blocked", "stalled", "done", "disposed"] {
            assert!(selected.split_whitespace().any(|word| word == field), "{field}: {document}");
        }
    }

    #[test]
    fn a_document_declares_only_given_arguments_and_refuses_unknown_or_missing_ones() {
        let verify = super::super::bindings::tool("verify").expect("verify");
        let given: Map<String, Value> = serde_json::from_value(json!({
            "unitId": "00000000-0000-0000-0000-000000000000", "evidenceUrl": "https://x/1"
        }))
        .expect("object");
        let document = verify.document(&given, Surface::Mcp).expect("document");
        assert!(document.starts_with("mutation($unitId: UUID!, $evidenceUrl: String)"), "{document}");
        assert!(document.contains("to: VERIFIED"), "{document}");
        assert!(document.contains("legalActions(surface: MCP)"), "{document}");
        let mut missing = given.clone();
        missing.remove("unitId");
        let err = verify.document(&missing, Surface::Mcp).expect_err("missing");
        assert!(matches!(err, LedgerError::InvalidInput { ref argument, .. } if argument == "unitId"), "{err}");
        let mut unknown = given;
        unknown.insert("to".into(), json!("DONE"));
        let err = verify.document(&unknown, Surface::Mcp).expect_err("unknown");
        assert!(matches!(err, LedgerError::InvalidInput { ref argument, .. } if argument == "to"), "{err}");
    }
}
