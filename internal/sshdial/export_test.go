package sshdial

import "os"

// DecryptForBenchmark decrypts a key file the way every dial did before
// parsed keys were kept, for BenchmarkCheckEncryptedKey's baseline.
func DecryptForBenchmark(path, passphrase string) error {
	pem, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	_, err = parseKey(pem, []byte(passphrase))
	return err
}
