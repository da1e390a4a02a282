import { fileURLToPath } from 'node:url';
import type { DataConverter, PayloadCodec } from '@temporalio/common';
import { TrustedInputCodec, type EncryptionCodec } from './codec.js';

/**
 * The payload and failure converters of every Temporal party of the service (workflows/
 * data-converter.cjs): failure messages and stack traces encrypted by the codec like payloads,
 * and the values the worker refuses as untrusted. The SDK loads it by path: in the workflow
 * bundle, in the worker for activities, in clients.
 */
export const dataConverterPath = fileURLToPath(new URL('../../workflows/data-converter.cjs', import.meta.url));

/** The converters the workflow bundle is built with (bundleWorkflowCode options). */
export const bundledConverters = { payloadConverterPath: dataConverterPath, failureConverterPath: dataConverterPath } as const;

/** A client's: the service codec, and failure messages read from their encrypted attributes. */
export const clientDataConverter = (codec: PayloadCodec): DataConverter => ({ payloadCodecs: [codec], failureConverterPath: dataConverterPath });

/** The worker's: only payloads the service produced are input (TrustedInputCodec); failures as the clients'. */
export const workerDataConverter = (codec: EncryptionCodec): DataConverter => ({ payloadCodecs: [new TrustedInputCodec(codec)], ...bundledConverters });
