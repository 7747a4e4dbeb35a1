import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";

/**
 * JSON Schemas of the tools, read off the API's descriptors (one source: the proto): a tool's
 * input is its request message's fields by their proto names (snake_case), its output the
 * response message as the REST face writes it (src/transcode/rest-json.ts: JSON names, 64-bit
 * integers as numbers, timestamps as strings, enums by their names). Nothing is `required` in an
 * output (the REST JSON leaves unset messages out) and no input rule is repeated here: the hub's
 * own decoding and validation decide, once, on every face.
 */
export type JsonSchema = { [key: string]: unknown };

const integer = new Set([
  ScalarType.INT32,
  ScalarType.UINT32,
  ScalarType.SINT32,
  ScalarType.FIXED32,
  ScalarType.SFIXED32,
  ScalarType.INT64,
  ScalarType.UINT64,
  ScalarType.SINT64,
  ScalarType.FIXED64,
  ScalarType.SFIXED64,
]);

function scalar(t: ScalarType): JsonSchema {
  if (integer.has(t)) return { type: "integer" };
  if (t === ScalarType.BOOL) return { type: "boolean" };
  if (t === ScalarType.FLOAT || t === ScalarType.DOUBLE) return { type: "number" };
  return { type: "string" };
}

/** One field's value, following messages up to `depth` levels (the API has no deep nesting). */
function valueOf(field: DescField, depth: number): JsonSchema {
  switch (field.fieldKind) {
    case "scalar":
      return scalar(field.scalar);
    case "enum":
      return { type: "string" };
    case "message":
      return messageOf(field.message, depth - 1);
    case "list":
      return {
        type: "array",
        items:
          field.listKind === "scalar" ? scalar(field.scalar) : field.listKind === "enum" ? { type: "string" } : messageOf(field.message, depth - 1),
      };
    case "map":
      return { type: "object" };
  }
}

function messageOf(message: DescMessage, depth: number): JsonSchema {
  if (message.typeName === "google.protobuf.Timestamp") return { type: "string", format: "date-time" };
  if (depth <= 0) return { type: "object" };
  const properties: Record<string, JsonSchema> = {};
  for (const f of message.fields) properties[f.jsonName] = valueOf(f, depth);
  return { type: "object", properties };
}

/** The output schema of a response message, as the REST JSON writes it. */
export const outputSchemaOf = (message: DescMessage): JsonSchema => messageOf(message, 6);

/**
 * The input schema of a request message: the `fields` a model may set (by proto name), each
 * described. Fields the session fills (the agent, the project) are never among them.
 */
export function inputSchemaOf(message: DescMessage, fields: Record<string, string>, required: string[] = []): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  for (const [name, description] of Object.entries(fields)) {
    const field = message.fields.find((f) => f.name === name);
    if (!field) throw new Error(`${message.typeName} has no field ${name}`);
    properties[name] = { ...valueOf(field, 1), description };
  }
  return { type: "object", properties, ...(required.length > 0 && { required }), additionalProperties: false };
}
