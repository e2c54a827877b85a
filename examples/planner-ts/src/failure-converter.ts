// The failure converter of an encrypting client, loaded by path
// (DataConverter.failureConverterPath). As codec.NewFailureConverter in Go:
// error messages and stack traces travel in an encoded payload, so the
// payload codec encrypts them too.

import { DefaultFailureConverter } from '@temporalio/common';

export const failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
