'use strict';
/**
 * The data converter of the service's workflows, activities and Temporal clients, as the Temporal
 * SDK loads it: by path (`payloadConverterPath`, `failureConverterPath`), with `require`, in the
 * worker's workflow bundle and in plain Node alike. That is why it is CommonJS with no import but
 * the SDK's; workflows/trust.ts holds the same names for TypeScript code (a unit test keeps the
 * two in step). Deterministic: it is part of the workflow bundle.
 *
 * - Payloads: the worker's codec (TrustedInputCodec, src/temporal/codec.ts) hands over a payload
 *   that is not the service's ciphertext as one of encoding `binary/untrusted`, without its bytes.
 *   This converter turns it into an inert value that throws `untrusted_input` on any use: read a
 *   field, iterate it, serialise it, or resolve a promise with it (an activity result sent with
 *   the Temporal CLI then fails the activity's promise). The workflow interceptors
 *   (workflows/trust.interceptors.ts) refuse it before a run starts or an update is accepted.
 * - Failures: messages and stack traces travel in the failure's `encodedAttributes`, a payload,
 *   so the codec encrypts them like every other payload (a node's error can quote the data it
 *   failed on); the message Temporal stores is "Encoded failure". Encoded attributes that are
 *   not the service's are ignored: the failure keeps the message it came with.
 */
const { ApplicationFailure, CompositePayloadConverter, DefaultFailureConverter, defaultPayloadConverter } = require('@temporalio/common');

const UNTRUSTED_ENCODING = 'binary/untrusted';
const UNTRUSTED_MARK = Symbol.for('workflow-svc.untrusted-input');
const UNTRUSTED_INPUT = 'untrusted_input';

const refusal = () =>
  ApplicationFailure.create({
    type: UNTRUSTED_INPUT,
    nonRetryable: true,
    message: 'A value sent to this run was not produced by this service (it is not encrypted with the service key); it was not used',
  });

const refuse = () => {
  throw refusal();
};

/** Whether `value` is what the converter made of a payload that is not the service's. */
function isUntrusted(value) {
  return typeof value === 'object' && value !== null && Object.prototype.hasOwnProperty.call(value, UNTRUSTED_MARK);
}

/**
 * A value that stands for an untrusted payload: it has no content, and every use of it but the
 * checks above throws. Resolving a promise with it reads its `then`, so the promise rejects.
 */
function untrustedValue() {
  const target = Object.freeze({ [UNTRUSTED_MARK]: true });
  return new Proxy(target, { get: refuse, has: refuse, ownKeys: refuse, set: refuse, deleteProperty: refuse, defineProperty: refuse });
}

const encodingOf = (payload) => {
  const bytes = payload && payload.metadata && payload.metadata.encoding;
  return bytes ? String.fromCharCode(...bytes) : undefined;
};

class UntrustedPayloadConverter {
  constructor() {
    this.encodingType = UNTRUSTED_ENCODING;
  }
  toPayload(value) {
    // Never sent on: what came untrusted does not leave as the service's own.
    if (isUntrusted(value)) refuse();
    return undefined;
  }
  fromPayload() {
    return untrustedValue();
  }
}

const payloadConverter = new CompositePayloadConverter(new UntrustedPayloadConverter(), ...defaultPayloadConverter.converters);

class ServiceFailureConverter extends DefaultFailureConverter {
  constructor() {
    super({ encodeCommonAttributes: true });
  }
  failureToError(failure, converter, context) {
    if (failure.encodedAttributes && encodingOf(failure.encodedAttributes) === UNTRUSTED_ENCODING) {
      failure = { ...failure, encodedAttributes: null };
    }
    return super.failureToError(failure, converter, context);
  }
}

const failureConverter = new ServiceFailureConverter();

exports.payloadConverter = payloadConverter;
exports.failureConverter = failureConverter;
exports.isUntrusted = isUntrusted;
exports.UNTRUSTED_ENCODING = UNTRUSTED_ENCODING;
exports.UNTRUSTED_MARK = UNTRUSTED_MARK;
exports.UNTRUSTED_INPUT = UNTRUSTED_INPUT;
