/**
 * Client of the edgekit on-device agent for Node 20 and browsers (the fetch API only):
 *
 *     import { AgentClient, tensor } from "edgekit-sdk";
 *     const agent = new AgentClient({ baseUrl: "http://127.0.0.1:8765", token });
 *     const { outputs, meta } = await agent.infer("digits", { x: tensor("float32", pixels, [1, 64]) });
 */
export { AgentClient } from "./client.js";
export type {
  AgentClientOptions,
  CallOptions,
  Health,
  InferMeta,
  InferOptions,
  InferResult,
  LoadOptions,
  ModelInfo,
  RequestOptions,
} from "./client.js";
export { fromFloat16Bit, fromFloat16Bits, toFloat16Bit, toFloat16Bits } from "./float16.js";
export { AgentConnectionError, AgentError, AgentTimeoutError } from "./errors.js";
export {
  checkTensor,
  CONTENT_TYPE,
  decodeTensors,
  DTYPES,
  encodeTensors,
  isDType,
  itemSize,
  MAX_HEADER,
  MAX_TENSORS,
  tensor,
  tensorBytes,
  tensorFromBytes,
  WireError,
} from "./wire.js";
export type { AnyTensor, DataOf, Decoded, DType, Tensor, TensorData } from "./wire.js";
export type { Operations, Schemas } from "./api-types.js";
