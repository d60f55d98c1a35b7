package coralcaddy

import "fmt"

// cacheSizeWarning says when cache_size is more than the cache's file
// system can hold: the bytes free there plus what the cache already
// holds. The cache would fill the disk long before it evicts anything.
// "" when it fits or the free space is unknown.
func cacheSizeWarning(dir string, cacheSize, cached int64) string {
	free, ok := freeBytes(dir)
	if !ok || cacheSize <= free+cached {
		return ""
	}
	return fmt.Sprintf("cache_size %d bytes is more than the file system of %s can hold (%d bytes free, %d cached): the disk fills before the cache evicts anything; lower cache_size", cacheSize, dir, free, cached)
}
