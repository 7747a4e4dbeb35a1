import { createRegistry, toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { Code, type ServiceImpl } from "@connectrpc/connect";
import {
  ServerReflection,
  type ServerReflectionRequest,
  type ServerReflectionResponse,
} from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServerReflectionResponseSchema } from "../../gen/ts/grpc/reflection/v1/reflection_pb.js";

type Response = MessageInitShape<typeof ServerReflectionResponseSchema>;

/** A file and everything it imports, dependencies first, each once. */
function withDependencies(file: DescFile, seen = new Set<string>(), out: DescFile[] = []): DescFile[] {
  if (seen.has(file.name)) return out;
  seen.add(file.name);
  for (const dep of file.dependencies) withDependencies(dep, seen, out);
  out.push(file);
  return out;
}

/**
 * gRPC server reflection (grpc.reflection.v1) over the generated descriptors, so that
 * `buf curl --list-services` and calls without `--schema` work. Answers from the files of the
 * served services and their imports; public (no credentials).
 */
export function reflectionHandlers(services: DescService[]): ServiceImpl<typeof ServerReflection> {
  const files = new Map([ServerReflection, ...services].flatMap((s) => withDependencies(s.file)).map((f) => [f.name, f]));
  const registry = createRegistry(...files.values());
  const serviceNames = [ServerReflection, ...services].map((s) => s.typeName);

  const fileResponse = (file: DescFile | undefined, what: string): Response["messageResponse"] =>
    file
      ? {
          case: "fileDescriptorResponse",
          value: { fileDescriptorProto: withDependencies(file).map((f) => toBinary(FileDescriptorProtoSchema, f.proto)) },
        }
      : { case: "errorResponse", value: { errorCode: Code.NotFound, errorMessage: `${what} not found` } };

  /** The file defining a symbol; a method resolves through its service. */
  function fileOfSymbol(symbol: string): DescFile | undefined {
    const desc = registry.get(symbol);
    if (desc) return desc.file;
    const dot = symbol.lastIndexOf(".");
    const service = dot > 0 ? registry.getService(symbol.slice(0, dot)) : undefined;
    return service?.methods.some((m) => m.name === symbol.slice(dot + 1)) ? service.file : undefined;
  }

  function answer(req: ServerReflectionRequest): ServerReflectionResponse["messageResponse"] | Response["messageResponse"] {
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: serviceNames.map((name) => ({ name })) } };
      case "fileByFilename":
        return fileResponse(files.get(r.value), `file ${r.value}`);
      case "fileContainingSymbol":
        return fileResponse(fileOfSymbol(r.value), `symbol ${r.value}`);
      case "fileContainingExtension": {
        const extendee = registry.getMessage(r.value.containingType);
        const ext = extendee && registry.getExtensionFor(extendee, r.value.extensionNumber);
        return fileResponse(ext?.file, `extension ${r.value.containingType}/${r.value.extensionNumber}`);
      }
      case "allExtensionNumbersOfType": {
        const message = registry.getMessage(r.value);
        if (!message) return fileResponse(undefined, `type ${r.value}`);
        const numbers = [...registry].filter((d) => d.kind === "extension" && d.extendee.typeName === r.value);
        return {
          case: "allExtensionNumbersResponse",
          value: { baseTypeName: r.value, extensionNumber: numbers.map((d) => (d.kind === "extension" ? d.number : 0)) },
        };
      }
      default:
        return { case: "errorResponse", value: { errorCode: Code.InvalidArgument, errorMessage: "empty request" } };
    }
  }

  return {
    async *serverReflectionInfo(requests) {
      for await (const req of requests) {
        yield { validHost: req.host, originalRequest: req, messageResponse: answer(req) } as Response;
      }
    },
  };
}
